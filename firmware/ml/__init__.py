"""firmware/ml"""
